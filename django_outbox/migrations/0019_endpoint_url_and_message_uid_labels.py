"""The labels the admin shows: "URL" and "UID", not "Url" and "Uid". No SQL."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_outbox', '0018_mysql_indexes_without_status'),
    ]

    operations = [
        migrations.AlterField(
            model_name='endpoint',
            name='url',
            field=models.URLField(max_length=2048, verbose_name='URL'),
        ),
        migrations.AlterField(
            model_name='message',
            name='uid',
            field=models.CharField(max_length=64, unique=True, verbose_name='UID'),
        ),
    ]
