"""What the emulator and the fault proxy share on the wire: fault rules, the ledger, route names.

Both backends import this; neither imports the other.
"""
