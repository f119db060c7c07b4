from tritonlite.cli import main

raise SystemExit(main())
