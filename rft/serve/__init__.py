"""Serve mode's pure parts: OpenAI-style requests read into sampling settings, replies shaped as
OpenAI responses and stream chunks, and a session's answered calls turned into trajectories.
No HTTP and no Kafka here: the server process is rft.consumers.serve."""
