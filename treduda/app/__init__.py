"""The application layer: the command line, the benchmarks and the demo, built on the library."""
