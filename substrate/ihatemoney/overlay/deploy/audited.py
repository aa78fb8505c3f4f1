"""budget.example's WSGI entry point since the compliance review: deploy/app.py's
application, with every API access recorded in the audit trail (deploy/audit.py)."""

from deploy.app import application, ihatemoney
from deploy.audit import install

install(ihatemoney)

__all__ = ["application"]
