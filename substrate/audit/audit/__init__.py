"""budget.example's audit collector (a stand-in for the compliance team's service)."""
