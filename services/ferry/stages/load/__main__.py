from ferry.stages.load.service import main

main()
