#!/usr/bin/env bash
# C++ compiler wrapper: runs g++ with any C++11/14 standard flag raised to C++17.
# Torch 2.x headers need C++17, and Horovod 0.28.1's CMake forces C++14 (also for Gloo).
args=()
for a in "$@"; do
  case "$a" in
    -std=c++11|-std=c++14|-std=gnu++11|-std=gnu++14) args+=(-std=c++17) ;;
    *) args+=("$a") ;;
  esac
done
exec "${AVGBENCH_REAL_CXX:-g++}" "${args[@]}"
