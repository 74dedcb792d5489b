"""`python -m s2s`: the same as the `s2s` command."""
import sys

from s2s.cli import main

sys.exit(main())
