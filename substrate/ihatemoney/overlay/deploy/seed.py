"""budget.example's staging data: shared-budget projects with members and bills.

`python -m deploy.seed [--projects N] [--bills N]` creates the schema (I Hate Money's own
migrations, run by its app factory) and writes N projects `group-<n>` (password
`secret-<n>`, six members each) with N bills each, every bill paid by one member for two
to six others. Deterministic: the same arguments write the same data.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
from pathlib import Path

os.environ.setdefault(
    "IHATEMONEY_SETTINGS_FILE_PATH", str(Path(__file__).with_name("ihatemoney.cfg"))
)

from ihatemoney.models import BillType, Project, db  # noqa: E402
from ihatemoney.run import create_app  # noqa: E402
from ihatemoney.utils import generate_password_hash  # noqa: E402

MEMBERS = ("Alex", "Bea", "Chidi", "Dana", "Emil", "Farah")
WHAT = ("groceries", "rent", "train tickets", "pizza", "electricity", "cinema", "hardware")


def seed(projects: int, bills: int) -> None:
    rng = random.Random(7)
    start = datetime.date(2026, 1, 1)
    app = create_app()
    with app.app_context():
        bill_id = person_id = 0
        people, rows, owers = [], [], []
        for n in range(1, projects + 1):
            project = Project(
                id=f"group-{n}",
                name=f"Group {n}",
                password=generate_password_hash(f"secret-{n}"),
                contact_email=f"group-{n}@budget.example",
                default_currency="XXX",
            )
            db.session.add(project)
            ids = []
            for name in MEMBERS:
                person_id += 1
                ids.append(person_id)
                people.append(
                    {"id": person_id, "project_id": f"group-{n}", "name": name,
                     "weight": 1.0, "activated": True}
                )
            for _ in range(bills):
                bill_id += 1
                amount = round(rng.uniform(3, 180), 2)
                day = start + datetime.timedelta(days=rng.randrange(330))
                rows.append(
                    {"id": bill_id, "payer_id": rng.choice(ids), "amount": amount,
                     "converted_amount": amount, "date": day, "creation_date": day,
                     "what": rng.choice(WHAT), "bill_type": BillType.EXPENSE.name,
                     "external_link": "", "original_currency": "XXX"}
                )
                for who in rng.sample(ids, rng.randint(2, 6)):
                    owers.append({"bill_id": bill_id, "person_id": who})
        db.session.commit()
        # bulk rows straight through the driver: SQLAlchemy-Continuum's hooks want an ORM
        # unit of work, and the staging data has no edit history to record
        conn = db.engine.raw_connection()
        try:
            cur = conn.cursor()
            for table, batch in (("person", people), ("bill", rows), ("billowers", owers)):
                cols = list(batch[0])
                cur.executemany(
                    f"INSERT INTO {table} ({', '.join(cols)}) "
                    f"VALUES ({', '.join('%(' + c + ')s' for c in cols)})",
                    batch,
                )
            for table in ("person", "bill"):
                cur.execute(f"SELECT setval('{table}_id_seq', (SELECT max(id) FROM {table}))")
            conn.commit()
        finally:
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=40)
    parser.add_argument("--bills", type=int, default=300)
    args = parser.parse_args()
    seed(args.projects, args.bills)


if __name__ == "__main__":
    main()
