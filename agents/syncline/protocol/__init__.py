"""Pure protocol logic shared by agents, tests and benchmarks. Nothing here does I/O."""
