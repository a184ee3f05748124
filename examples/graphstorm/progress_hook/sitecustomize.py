"""GraphStorm's progress as dglrun's DGLRUN_PROGRESS lines, without editing GraphStorm.

Python imports `sitecustomize` at start-up from sys.path, so this folder on
PYTHONPATH (one env line in the worker's pod template) loads it into every
GraphStorm process. It adds a filter to the root logger, which GraphStorm
logs to (`logging.info`), and reads three of its lines:

    _num_epochs: 4                                  (its config, rank 0)
    Part 0 | Epoch 00001 | Batch 020 | Loss: 0.2620 | Time: 0.2163
    Epoch 1 take 25.215 seconds                      (end of an epoch, rank 0)

At the end of each epoch it prints
`DGLRUN_PROGRESS {"epoch":2,"epochs":4,"loss":0.262}` (epochs done, the
last logged loss), which dglrun's launcher turns into status.progress. A
filter, not a handler: GraphStorm's config calls logging.basicConfig(force=True),
which replaces the root logger's handlers but keeps its filters. The filter
never drops a record, and any error in it is swallowed: progress reporting
must not break training.
"""

import json
import logging
import math
import re

_LOSS = re.compile(r"Part \d+ \| Epoch (\d+) \| Batch \d+ \| Loss: (\S+)")
_EPOCH_END = re.compile(r"Epoch (\d+) take ")
_NUM_EPOCHS = re.compile(r"_num_epochs: (\d+)$")


class _GraphStormProgress(logging.Filter):
    def __init__(self):
        super().__init__()
        self.epochs = None
        self.loss = None

    def filter(self, record):
        try:
            self._read(record.getMessage())
        except Exception:  # pylint: disable=broad-except
            pass
        return True

    def _read(self, msg):
        m = _NUM_EPOCHS.search(msg)
        if m:
            self.epochs = int(m.group(1))
            return
        m = _LOSS.search(msg)
        if m:
            loss = float(m.group(2))
            self.loss = loss if math.isfinite(loss) else None
            return
        m = _EPOCH_END.match(msg)
        if m:
            fields = {"epoch": int(m.group(1)) + 1, "epochs": self.epochs, "loss": self.loss}
            fields = {k: v for k, v in fields.items() if v is not None}
            print("DGLRUN_PROGRESS " + json.dumps(fields, separators=(",", ":")), flush=True)


logging.getLogger().addFilter(_GraphStormProgress())
