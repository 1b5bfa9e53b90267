"""The product's side of the collectors: matchers built from definitions, live collection, the audit."""
