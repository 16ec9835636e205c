"""The replay row format: Experience events as export rows and back (consumers export them,
producers import them), in the library so that neither side imports the other."""
