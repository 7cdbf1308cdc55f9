"""python -m randopt: the randopt command (randopt/command.py)."""
from randopt.command import main

raise SystemExit(main())
