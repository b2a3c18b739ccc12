"""One 2-worker LocalCluster on 127.0.0.1 for the whole directory, closed at the end."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")


@pytest.fixture(scope="session")
def rt():
    import ustc.distributed as ud

    runtime = ud.connect(n_workers=2)
    yield runtime
    ud.shutdown()
