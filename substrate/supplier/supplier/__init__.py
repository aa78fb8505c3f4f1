"""Supplier quote API: the slow upstream the pricing service depends on."""
