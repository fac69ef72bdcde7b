"""The service layer: every change to tenant data goes through here, validated and audited."""
