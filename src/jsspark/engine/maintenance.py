"""The upkeep that keeps a stream table's commit cost flat while a job writes to it for days.

A landing job commits every micro-batch: each commit adds a file per partition it touches
and a log entry. Left alone, every later commit pays for all of them (delta-rs: 43 ms a
commit at first, 292 ms after 3,000 landing commits on a ``hash(8)`` stream). So the process
that makes every ``EVERY``-th table version also:

- compacts small files, in tiers: files below ``TIERS[0]`` every time, below the next size
  every tenth time, and so on. A file is rewritten a few times on its way to the largest size,
  not every time (one compaction size for all would rewrite a growing file at every pass);
- deletes the log entries older than the table's ``delta.logRetentionDuration`` (Delta's
  default, 30 days). delta-rs would list the whole log to do this after every commit, which
  is most of what grows once files are compacted, so the commits themselves skip it
  (``HOOKS``); checkpoints are still written every ``delta.checkpointInterval`` commits;
- every tenth time, vacuums: deletes the files no version within the table's
  ``delta.deletedFileRetentionDuration`` (default a week) needs, which is what bounds the disk
  a stream with limits takes.

Both retentions are the table's own Delta properties, so time travel (``as_of``), Delta
streaming readers and jsspark's own readers keep what Delta promises them. Upkeep is best
effort: it never fails the commit that triggered it, and a concurrent writer's commit makes it
stop and leave the rest to the next turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltalake import PostCommitHookProperties

EVERY = 100  # table versions between upkeeps (delta-rs's default checkpoint interval)
MIB = 1 << 20
TIERS = (2 * MIB, 32 * MIB, 128 * MIB)  # compaction target sizes; tier k runs every 10**k-th upkeep
VACUUM_TIER = 1  # vacuum with the tier-1 compaction (every 1,000 versions)
HOOKS = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)


@dataclass(frozen=True)
class Upkeep:
    """What one upkeep does: compact files smaller than ``target_size``, clean up the log, and
    ``vacuum`` or not."""

    target_size: int
    vacuum: bool


def due(version: int) -> Upkeep | None:
    """The upkeep the process that committed ``version`` owes the table (None: none yet).
    Each version is made by exactly one writer, so exactly one does it, whoever writes."""
    if version <= 0 or version % EVERY:
        return None
    turn, tier = version // EVERY, 0
    while tier + 1 < len(TIERS) and turn % 10 ** (tier + 1) == 0:
        tier += 1
    return Upkeep(TIERS[tier], tier >= VACUUM_TIER)
