from ferry.stages.extract.service import main

main()
