"""The pytest adapter: catalog items, settings, fixtures and the evidence reporter.

``plugin.py`` holds the hooks and imports this package lazily; the catalog engine
(:mod:`pytest_e2b_env.catalog`) never imports pytest.
"""
