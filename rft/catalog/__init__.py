"""The catalog: what knows every registry. It loads configs with the checks of the parts they
select (`load_config`), above rft.config, which imports no other part of rft."""

from rft.catalog.loading import config_from_dict, load_config, load_pipeline

__all__ = ["config_from_dict", "load_config", "load_pipeline"]
