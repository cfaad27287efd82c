<?php
require __DIR__ . '/../../db.php';
$c = require_customer();
page('My Account', '<p id="contact">' . htmlspecialchars($c['name']) . '</p>');
