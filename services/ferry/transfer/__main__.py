from ferry.transfer.service import main

main()
