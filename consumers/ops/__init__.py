"""Run operations that only read: the run plan every process derives, status, check, bench, what is left and what is in use."""
