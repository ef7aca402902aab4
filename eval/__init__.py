"""Model adapters, data, KL and downstream evaluation, report generation."""
