import sys

from builtin_engine.cli import main

sys.exit(main())
