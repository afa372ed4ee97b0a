"""`make fuzz`: Schemathesis against the live OpenAPI document of a running stack."""
