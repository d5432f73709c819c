"""CLAW: the PHY-informed transport of clawbed — the UE client, the server, and their wire codec."""
