"""A study of the benchmarks: README.md beside this file says what it measures, how to run it and what it writes."""
