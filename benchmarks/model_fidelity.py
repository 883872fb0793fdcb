"""The model beside real H100 times (issue #12): each calibration kernel regenerated from its
expression, sizes, strategy and parameters; estimate vs measured per row, Spearman rho, median
and worst error, bound violations, and the measured rank of the search's pick; rows whose
kernel code generation has changed since they were measured are left out: told by the code
digest the row (or NAME.codes.json beside the data file, benchmarks/code_digests.py) records,
else by ptxas's registers where nvcc is present, with or without --no-ptxas (without either,
the report counts the rows it could not check). Then the same figures on problems held out
(leave one problem out, and halves; issue 40). No GPU needed (nvcc, when present, gives
ptxas's registers and spills; --no-ptxas leaves those to the model, as the search does). See
treduda/app/fidelity.py and docs/model-fidelity.md.

    python benchmarks/model_fidelity.py [--data benchmarks/data/h100_measured.json]
                                        [--gpu H100] [--json out.json] [--no-ptxas]
                                        [--watch tccg_19,tccg_28,tccg_30] [--terms]
"""

from __future__ import annotations

import sys

from treduda.app.fidelity import main

if __name__ == "__main__":
    sys.exit(main())
