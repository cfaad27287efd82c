<?php
require __DIR__ . '/../../../db.php';
session_start();
$_SESSION = [];
session_destroy();
header('Location: /', true, 302);
