"""Estimates built on the trace: training set-ups and memory."""
