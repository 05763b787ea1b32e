"""The causes a GPU idle gap is given (collectors/window_picture.py), shared by the
collectors that attribute them and the renderers that draw them."""

from __future__ import annotations

IDLE_CAUSES = ("data", "sync", "copies", "optimizer", "launch", "unexplained")
CAUSE_LABELS = {"data": "data wait", "sync": "host sync", "copies": "copies", "optimizer": "optimizer",
                "launch": "launch overhead", "unexplained": "unexplained"}
# the replay scenario (gpudoctor/replay/scenarios.py) that removes each cause's gaps: how a
# finding, through its prediction, is linked to the gaps it explains
SCENARIO_CAUSES = {"data": "data", "sync": "sync", "pinned": "copies", "small_copies": "copies",
                   "optimizer": "optimizer", "launch": "launch"}
