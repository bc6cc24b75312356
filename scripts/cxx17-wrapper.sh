#!/usr/bin/env bash
# C++ compiler wrapper: runs g++ with any C++11/14 standard flag raised to C++17, and with
# <string> and <stdexcept> included in every file.
# Torch 2.x headers need C++17, and Horovod 0.28.1's CMake forces C++14 (also for Gloo).
# Horovod's sources use std::string and std::runtime_error relying on transitive includes
# that GCC 13's libstdc++ no longer provides.
args=(-include string -include stdexcept)
for a in "$@"; do
  case "$a" in
    -std=c++11|-std=c++14|-std=gnu++11|-std=gnu++14) args+=(-std=c++17) ;;
    *) args+=("$a") ;;
  esac
done
exec "${AVGBENCH_REAL_CXX:-g++}" "${args[@]}"
