from tritonlite.tune.cli import main

raise SystemExit(main())
