from installer.cli import main

main()
