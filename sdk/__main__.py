from sdk.cli import main

main()
