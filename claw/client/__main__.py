"""``python -m clawbed.claw.client``: the CLAW client (see :mod:`.cli`)."""

import sys

from clawbed.claw.client.cli import main

sys.exit(main())
