"""Capacity: wait causes, headroom and quota fit read from the warehouse; recommendations; the what-if replay."""
