"""Load the shop's staging data into Kinto: the schema, the API clients' accounts and the
product records they read.

    python deploy/seed.py deploy/kinto.ini [--clients N] [--products N] [--aisles N]

Deterministic: client `client-<n>` has the password `secret-<n>`; product `product-<n>`
is readable by every authenticated client, and in aisle n % aisles + 1.
"""

from __future__ import annotations

import argparse

import transaction
from pyramid.paster import bootstrap

from kinto.core import scripts
from kinto.plugins.accounts.utils import hash_password

BUCKET, COLLECTION = "shop", "products"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ini")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--products", type=int, default=200)
    ap.add_argument("--aisles", type=int, default=12, help="product-<n> is in aisle n %% N + 1")
    args = ap.parse_args()
    env = bootstrap(args.ini, options={"command": "migrate"})
    scripts.migrate(env)
    registry = env["registry"]
    storage, permission = registry.storage, registry.permission
    for n in range(1, args.clients + 1):
        user = f"client-{n}"
        entry = {"id": user, "password": hash_password(f"secret-{n}")}
        storage.update(resource_name="account", parent_id=user, object_id=user, obj=entry)
        permission.add_principal_to_ace(f"/accounts/{user}", "write", f"account:{user}")
    storage.update(resource_name="bucket", parent_id="", object_id=BUCKET, obj={"id": BUCKET})
    permission.add_principal_to_ace(f"/buckets/{BUCKET}", "read", "system.Authenticated")
    parent = f"/buckets/{BUCKET}"
    storage.update(
        resource_name="collection", parent_id=parent, object_id=COLLECTION, obj={"id": COLLECTION}
    )
    records = f"{parent}/collections/{COLLECTION}"
    for n in range(1, args.products + 1):
        ident = f"product-{n}"
        obj = {
            "id": ident,
            "name": f"Product {n}",
            "price_cents": 199 + (n * 37) % 9000,
            "aisle": n % args.aisles + 1,
            "tags": [f"aisle-{n % args.aisles + 1}", f"brand-{n % 7}"],
        }
        storage.update(resource_name="record", parent_id=records, object_id=ident, obj=obj)
    transaction.commit()
    print(f"seeded {args.clients} clients and {args.products} products")


if __name__ == "__main__":
    main()
