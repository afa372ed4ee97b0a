"""`make test-hosts`: one web, PostgreSQL, Redis and two worker hosts in their own mount
namespaces, sharing nothing else; the checks of issue 16 ("several hosts") run against them."""
