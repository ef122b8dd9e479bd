"""What the cluster runs: refresh, ownership and adoption, driver versions, inventory, telemetry."""
