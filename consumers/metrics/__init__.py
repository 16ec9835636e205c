"""Metrics: the metrics topic followed into sinks, read back as series and plotted."""
