"""Avro schemas of the rft events: the wire contract.

One file per record and version, `<name>.v<N>.avsc`, namespace `rft.events`. Every version stays
here forever, because the fingerprint in each event's header selects its writer schema from this set.
"""
