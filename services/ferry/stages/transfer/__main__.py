from ferry.stages.transfer.service import main

main()
