"""A run's file bytes (its tmpfs files' peak), apart from its program's memory."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("playground", "0004_run_claimed_state_and_timings")]

    operations = [
        migrations.AddField(
            model_name="run", name="peak_file_bytes", field=models.BigIntegerField(blank=True, null=True)
        ),
    ]
