# Run receipts (runner/receipt.py): each host's chain head, and the receipts themselves.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("playground", "0021_sso_identities"),
    ]

    operations = [
        migrations.CreateModel(
            name="ReceiptChain",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("host", models.CharField(max_length=128, unique=True)),
                ("length", models.PositiveBigIntegerField(default=0)),
                ("head", models.CharField(blank=True, max_length=64)),
            ],
        ),
        migrations.CreateModel(
            name="Receipt",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("host", models.CharField(max_length=128)),
                ("sequence", models.PositiveBigIntegerField()),
                ("prev_hash", models.CharField(blank=True, max_length=64)),
                ("body", models.TextField()),
                ("sha256", models.CharField(max_length=64, unique=True)),
                ("signature", models.CharField(max_length=128)),
                ("key_id", models.CharField(max_length=32)),
                ("issued_at", models.DateTimeField(db_index=True)),
                (
                    "run",
                    models.OneToOneField(
                        db_constraint=False,
                        editable=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="receipt",
                        to="playground.run",
                    ),
                ),
            ],
            options={
                "ordering": ["host", "sequence"],
                "constraints": [models.UniqueConstraint(fields=("host", "sequence"), name="receipt_place_per_host")],
            },
        ),
    ]
