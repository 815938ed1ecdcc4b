"""Real measurement: timers, latency statistics, batch search, measured memory."""
