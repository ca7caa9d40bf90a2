"""Open the Optuna study storage that `hydra.sweeper.storage` names, for the sweeper and its jobs.

Two kinds of URL work. An SQLAlchemy URL (`sqlite:///<path>.db`, `postgresql://...`) opens Optuna's RDBStorage.
`journal:///<path>.log` opens an append-only journal file, which Optuna recommends on a shared file system (NFS),
where sqlite's locking is unreliable. Relative paths are made absolute, since jobs may run elsewhere.

No torch here: the sweeper plugin and the pruning callback import this module.
"""

from __future__ import annotations

import contextlib
import fcntl
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

JOURNAL = "journal:///"
SQLITE = "sqlite:///"
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://")  # an SQLAlchemy URL: dialect[+driver]://...


def check_storage(url: str) -> None:
    """Raise a one-line ValueError, before anything is written, if `url` names no study storage."""
    if url.startswith(JOURNAL) and len(url) > len(JOURNAL):
        return
    if _URL.match(url) and not url.startswith("journal:"):
        return
    raise ValueError(
        f"hydra.sweeper.storage={url!r} is not a study storage: use sqlite:///<path>.db, another SQLAlchemy URL "
        "(postgresql://user@host/db) or journal:///<path>.log (a journal file, for a file system nodes share)"
    )


def absolute_storage(url: str) -> str:
    """Make a relative sqlite or journal path absolute, and create its folder."""
    for prefix in (SQLITE, JOURNAL):
        if url.startswith(prefix) and ":memory:" not in url:
            path = Path(url[len(prefix) :]).expanduser().absolute()
            path.parent.mkdir(parents=True, exist_ok=True)
            return prefix + str(path)
    return url


def storage_file(url: str) -> Path | None:
    """Return the file of a sqlite or journal storage, or None for a database server or in-memory sqlite."""
    for prefix in (SQLITE, JOURNAL):
        if url.startswith(prefix) and ":memory:" not in url:
            return Path(url[len(prefix) :])
    return None


def open_storage(url: str, heartbeat: dict[str, Any] | None = None) -> Any:
    """Open the Optuna storage of `url`.

    `heartbeat` holds RDBStorage's heartbeat arguments; JournalStorage has no heartbeat and ignores it."""
    import optuna

    if url.startswith(JOURNAL):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url[len(JOURNAL) :]))
    return optuna.storages.RDBStorage(url, **(heartbeat or {}))


@contextlib.contextmanager
def study_lock(url: str) -> Iterator[None]:
    """Hold an exclusive lock so drivers of one file-backed study create tables and ask trials one at a time.

    This keeps them from asking more than n_trials in all. It flocks `<storage file>.drivers.lock`, since `.lock` is
    the journal backend's own. A database server has no file to lock, so drivers check each new trial's rank
    instead (study.Search). flock works across NFS v4 clients; where it fails, the rank check still holds."""
    path = storage_file(url)
    if path is None:
        yield
        return
    with open(f"{path}.drivers.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: rely on the rank check
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_trial(
    storage: str | optuna.storages.BaseStorage, study_name: str, trial_number: int, pruner: Any = None
) -> optuna.Trial:
    """Open the live trial `trial_number` of a stored study, from any process."""
    import optuna

    opened = open_storage(storage) if isinstance(storage, str) else storage  # a URL, journal:/// included
    study = optuna.load_study(study_name=study_name, storage=opened, pruner=pruner)
    study_id = opened.get_study_id_from_name(study_name)
    return optuna.Trial(study, opened.get_trial_id_from_study_id_trial_number(study_id, trial_number))
