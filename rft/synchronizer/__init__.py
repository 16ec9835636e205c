"""synchronizer: when explorers load new weights and when the trainer publishes them."""

from rft.synchronizer.sync_style import SYNC_STYLES, SyncStyle, build_sync_style

__all__ = ["SYNC_STYLES", "SyncStyle", "build_sync_style"]
