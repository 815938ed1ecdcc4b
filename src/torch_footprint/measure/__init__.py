"""Real measurement (DESIGN.md's ``bench`` stage): timers, latency statistics, batch
search, measured memory, and the calibration of this machine's ceilings."""
