"""``python -m dws_emulator`` runs the ``dws-emulator`` CLI."""

import sys

from .cli import main

sys.exit(main())
