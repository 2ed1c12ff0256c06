"""`difftest bisect`: the first commit at which a configured comparison fails its expectation,
searched on the first-parent history between a good and a bad commit.

- `history`: the commit line and diff stats (git)
- `evidence`: readings, the per-commit sequential test, the posterior over the first bad commit
- `search`: the bounds the decisions leave and the commits to test next (multisection)
- `trial`: one round: the comparison's arms placed at the commits under test, run and judged
- `journal`: the bisect's directory: plan, log of every run, resume
- `engine`: the loop that ties them together, and the result
"""

from difftest.bisect.engine import BisectResult, CommitRecord, Status, resume_bisect, start_bisect
from difftest.bisect.evidence import Decision, Reading, Sequential, Tally
from difftest.bisect.history import Commit
from difftest.bisect.trial import Mode, Observation

__all__ = ["BisectResult", "Commit", "CommitRecord", "Decision", "Mode", "Observation",
           "Reading", "Sequential", "Status", "Tally", "resume_bisect", "start_bisect"]
