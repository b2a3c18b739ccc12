"""``ustc demo``: the main job, a tour of what ustc does, with real output."""

from __future__ import annotations


def run(args=None) -> int:
    print("demo: coming up")
    return 0
