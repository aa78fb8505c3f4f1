"""Pricing API: shop prices computed from the supplier's quotes."""
