"""SREForge: grade SRE agents by closed-loop behavioural verification."""

__version__ = "0.1.0"
