"""Where an Optuna study lives, as `hydra.sweeper.storage` names it, for the sweeper and for the jobs it starts.

Two kinds of URL: an SQLAlchemy URL (`sqlite:///<path>.db`, `postgresql://...`: Optuna's RDBStorage) and
`journal:///<path>.log`, Optuna's JournalStorage on a JournalFileBackend: an append-only log file, the backend
Optuna recommends for a file system several machines share (NFS), where sqlite's locking is unreliable. A relative
path is taken from the directory the sweep starts in, and made absolute: jobs may run elsewhere (joblib workers,
SLURM nodes).

No torch here: imported by the sweeper plugin and the pruning callback (`open_trial`, from any process).
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
    """Refuse a storage value that names no study storage, in one line (a ValueError), before anything is written."""
    if url.startswith(JOURNAL) and len(url) > len(JOURNAL):
        return
    if _URL.match(url) and not url.startswith("journal:"):
        return
    raise ValueError(
        f"hydra.sweeper.storage={url!r} is not a study storage: use sqlite:///<path>.db, another SQLAlchemy URL "
        "(postgresql://user@host/db) or journal:///<path>.log (a journal file, for a file system nodes share)"
    )


def absolute_storage(url: str) -> str:
    """A relative sqlite or journal path made absolute, its folder made."""
    for prefix in (SQLITE, JOURNAL):
        if url.startswith(prefix) and ":memory:" not in url:
            path = Path(url[len(prefix) :]).expanduser().absolute()
            path.parent.mkdir(parents=True, exist_ok=True)
            return prefix + str(path)
    return url


def storage_file(url: str) -> Path | None:
    """The file a sqlite or journal storage lives in (None for a database server or sqlite in memory)."""
    for prefix in (SQLITE, JOURNAL):
        if url.startswith(prefix) and ":memory:" not in url:
            return Path(url[len(prefix) :])
    return None


def open_storage(url: str, heartbeat: dict[str, Any] | None = None) -> Any:
    """The Optuna storage of `url`. `heartbeat` (RDB only: Optuna 5's JournalStorage has none) holds RDBStorage's
    `heartbeat_interval`, `grace_period` and `heartbeat_stale_trial_callback`."""
    import optuna

    if url.startswith(JOURNAL):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url[len(JOURNAL) :]))
    return optuna.storages.RDBStorage(url, **(heartbeat or {}))


@contextlib.contextmanager
def study_lock(url: str) -> Iterator[None]:
    """Serialize what N drivers of one file-backed study must not do at once: create its tables, and
    reap-count-ask (so they never ask more than n_trials in all). An exclusive flock on `<storage file>.drivers.lock`
    (not `.lock`: the journal backend's own lock file). A database server has no file to lock: there the drivers
    check each new trial's rank instead (see study.Search). flock works across NFS v4 clients; on a file system
    without it, the rank check still holds."""
    path = storage_file(url)
    if path is None:
        yield
        return
    with open(f"{path}.drivers.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: the rank check alone
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_trial(
    storage: str | optuna.storages.BaseStorage, study_name: str, trial_number: int, pruner: Any = None
) -> optuna.Trial:
    """The live trial `trial_number` of a stored study, from any process (Optuna's ask/tell across processes)."""
    import optuna

    opened = open_storage(storage) if isinstance(storage, str) else storage  # a URL: also journal:///<path>
    study = optuna.load_study(study_name=study_name, storage=opened, pruner=pruner)
    study_id = opened.get_study_id_from_name(study_name)
    return optuna.Trial(study, opened.get_trial_id_from_study_id_trial_number(study_id, trial_number))
