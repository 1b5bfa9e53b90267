"""One project's rows on one machine belong to one config: a second config of the same project is refused.

Two folders both named ``agent`` (the default project is the folder's name), or two configs that
set the same ``project``, pointed at one shared store would write one site's rows and read each
other's firings as their own. The second is refused with the reason, on SQLite and PostgreSQL; a
config whose file is gone (a moved folder) gives its rows over.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from canary.errors import StoreError
from canary.store.engine import Store


def test_a_second_config_of_one_project_is_refused_until_the_first_is_gone(
    open_store: Callable[..., Store], tmp_path: Path,
) -> None:
    first, second = tmp_path / "a" / "canary.toml", tmp_path / "b" / "canary.toml"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text("")
    open_store(owner=first).close()
    open_store(owner=first).close()  # the same config again: its own rows
    with pytest.raises(StoreError) as refused:
        open_store(owner=second)
    assert str(first) in str(refused.value) and "project" in str(refused.value)
    open_store().close()  # a tool that names no config (a test, a migration) is not refused
    first.unlink()  # the first config's folder was moved: its rows go to the config that asks
    open_store(owner=second).close()
    with pytest.raises(StoreError):
        first.write_text("")
        open_store(owner=first)
