"""Integration tier: real runs, collectives, mpirun, horovodrun, namespaces (each test marked integration)."""
