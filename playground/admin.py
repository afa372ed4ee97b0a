"""The Django admin is Cordon's audit console."""

from django.contrib import admin

admin.site.site_header = "Cordon audit console"
admin.site.site_title = "Cordon"
admin.site.index_title = "Runs, datasets and hosts"
